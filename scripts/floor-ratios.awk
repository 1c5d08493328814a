# Reads the Go benchmark lines of bench-speed's appends part
# (BenchmarkDurableAppend's rows and BenchmarkDurableFloor's, each run
# several times) and prints, for each append row that has a bar, the
# median rate of the store (Mneme) and of each floor row of the same
# writers: the engine writing the same messages through plain SQL with
# nothing, with the (thread, seq) index (-seq), and with what the store
# writes beside (-shape; on PostgreSQL -batched-seq and -batched-shape,
# in one statement a group), each over the bar and Mneme's share of it. A
# floor below the bar is a bar this host cannot meet on that engine with
# at least what the row writes.
#
# The bars and the rows are read from the lines, not named here: a row's
# bar is its msgs/s over its "bar" figure (the benchmarks' appendBars,
# round numbers: the quotient, which Go prints to four digits, is rounded
# to two),
# and a floor belongs to the append row it is named after (sqlite/32,
# sqlite/32-seq, ...), in the order the lines first show them.
#
#   awk -f scripts/bench-lines.awk -f scripts/floor-ratios.awk runs
/^Benchmark(DurableAppend|DurableFloor)\// {
	name = $1
	sub(/-[0-9]+$/, "", name) # Go's -GOMAXPROCS suffix
	sub(/^Benchmark/, "", name)
	rate = value("msgs/s")
	add(name, rate)
	if (name in seen) next
	seen[name] = 1
	if (name ~ /^DurableAppend\//) {
		r = value("bar")
		if (r == "" || r + 0 <= 0 || rate == "") next
		row = substr(name, length("DurableAppend/") + 1)
		bar[row] = round2(rate / r)
		rows[++nrows] = row
	} else
		floors[++nfloors] = name
}
# round2 is x rounded to two significant digits.
function round2(x,    p) {
	p = 1
	while (x / p >= 100) p *= 10
	return int(x / p + 0.5) * p
}
END {
	for (r = 1; r <= nrows; r++) {
		row = rows[r]
		m = median("DurableAppend/" row)
		printf "%s: Mneme %.0f msgs/s, %.2f of the bar (%.0f)\n", row, m, m / bar[row], bar[row]
		for (i = 1; i <= nfloors; i++) {
			name = floors[i]
			if (name != "DurableFloor/" row && index(name, "DurableFloor/" row "-") != 1) continue
			f = median(name)
			printf "  %-40s %7.0f msgs/s, %.2f of the bar; Mneme at %.2f of it\n", name, f, f / bar[row], m / f
		}
	}
}
