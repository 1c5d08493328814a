# Reads the Go benchmark lines of bench-speed's peers part (Mneme's rows and
# tests/peers/mastra.mjs's, alternated over rounds) and prints each
# figure's median for Mneme and for Mastra, Mneme's ratio over Mastra, and
# the ratio the issue's bar sets over the issue's own Mastra figures (issue
# 19: Mastra on libSQL at synchronous=FULL appended 1,115-2,333 msgs/s,
# and took 58 ms to its first window after a restart of a 10,000-message
# thread; the bars are 3,000 and 20,000 msgs/s, 20 ms and 30 ms). Above
# that ratio, Mneme beats the bar on this host by the issue's own measure.
#
#   awk -f scripts/bench-lines.awk -f scripts/peer-ratios.awk runs
{
	name = $1
	sub(/-[0-9]+$/, "", name) # Go's -GOMAXPROCS suffix
}
name == "BenchmarkDurableAppend/sqlite/1" { add("m1", value("msgs/s")); add("m1cpu", value("cpu-µs/msg")) }
name == "BenchmarkDurableAppend/sqlite/32" { add("m32", value("msgs/s")); add("m32cpu", value("cpu-µs/msg")) }
name == "BenchmarkPeerAppend/mastra/full/1" { add("p1", value("msgs/s")); add("p1cpu", value("cpu-µs/msg")) }
name == "BenchmarkPeerAppend/mastra/full/32" { add("p32", value("msgs/s")); add("p32cpu", value("cpu-µs/msg")) }
name == "BenchmarkColdStart/10k" { add("mc10", value("ms/snapshot")) }
name == "BenchmarkColdStart/100k" { add("mc100", value("ms/snapshot")) }
name == "BenchmarkPeerColdStart/mastra/10k" { add("pc10", value("ms/first")) }
name == "BenchmarkPeerColdStart/mastra/100k" { add("pc100", value("ms/first")) }
function row(label, mk, pk, higher, bar,    m, p, r) {
	m = median(mk)
	p = median(pk)
	if (m < 0 || p < 0) {
		printf "%-44s %10s %10s %8s   %s\n", label, m < 0 ? "missing" : m, p < 0 ? "missing" : p, "-", bar
		missing = 1
		return
	}
	# Mneme's advantage either way: rate over rate, or time under time.
	r = higher ? m / p : p / m
	printf "%-44s %10.1f %10.1f %8.2f   %s\n", label, m, p, r, bar
}
END {
	# The issue's figures: its bars, and Mastra's at synchronous=FULL
	# (one writer; the issue has none with 32) and to its first window.
	lo = 1115; hi = 2333; cold = 58
	printf "%-44s %10s %10s %8s   %s\n", "figure (median)", "Mneme", "Mastra", "ratio", "the issue's bar as a ratio over its Mastra"
	row("durable append, one writer (msgs/s)", "m1", "p1", 1, between(3000, "3,000"))
	row("durable append, 32 threads (msgs/s)", "m32", "p32", 1, between(20000, "20,000") " (its one-writer Mastra)")
	row("CPU a durable append, one writer (µs)", "m1cpu", "p1cpu", 0, "none (less is better)")
	row("CPU a durable append, 32 threads (µs)", "m32cpu", "p32cpu", 0, "none (less is better)")
	row("first window after a restart, 10k (ms)", "mc10", "pc10", 0, sprintf("%.2f (%d ms over 20 ms)", cold / 20, cold))
	row("first window after a restart, 100k (ms)", "mc100", "pc100", 0, "none (no Mastra figure at 100k)")
	if (missing) exit 1
}
# between is the ratio a rate bar sets over the issue's Mastra range: over
# its best figure (the lenient end) and over its worst (the strict end).
function between(bar, label) {
	return sprintf("%.2f-%.2f (%s over %d-%d)", bar / hi, bar / lo, label, hi, lo)
}
