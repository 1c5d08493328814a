# Reads the Go benchmark lines of bench-speed's appends part
# (BenchmarkDurableAppend's rows and BenchmarkDurableFloor's, each run
# several times) and prints, for each of the issue's append bars, the
# median rate of the store (Mneme) and of each floor row of the same
# writers: the engine writing the same messages through plain SQL with
# nothing, with the (thread, seq) index (-seq), and with what the store
# writes beside (-shape; on PostgreSQL -batched-seq and -batched-shape,
# in one statement a group), each over the bar and Mneme's share of it. A
# floor below the bar is a bar this host cannot meet on that engine with
# at least what the row writes.
#
#   awk -f scripts/bench-lines.awk -f scripts/floor-ratios.awk runs
/^Benchmark(DurableAppend|DurableFloor)\// {
	name = $1
	sub(/-[0-9]+$/, "", name) # Go's -GOMAXPROCS suffix
	sub(/^Benchmark/, "", name)
	add(name, value("msgs/s"))
}
END {
	split("sqlite/1 sqlite/32 postgres/32", rows, " ")
	bar["sqlite/1"] = 3000; bar["sqlite/32"] = 20000; bar["postgres/32"] = 10000
	# The floor rows of each backend ("." the row of the same name).
	floors["sqlite"] = ". -seq -shape"
	floors["postgres"] = ". -batched -batched-seq -batched-shape"
	for (r = 1; r <= 3; r++) {
		row = rows[r]
		m = median("DurableAppend/" row)
		if (m < 0) continue
		printf "%s: Mneme %.0f msgs/s, %.2f of the bar (%d)\n", row, m, m / bar[row], bar[row]
		be = row; sub(/\/.*/, "", be)
		k = split(floors[be], fl, " ")
		for (i = 1; i <= k; i++) {
			name = "DurableFloor/" row (fl[i] == "." ? "" : fl[i])
			f = median(name)
			if (f < 0) continue
			printf "  %-40s %7.0f msgs/s, %.2f of the bar; Mneme at %.2f of it\n", name, f, f / bar[row], m / f
		}
	}
}
