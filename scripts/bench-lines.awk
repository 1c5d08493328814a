# Helpers for reading Go benchmark lines, loaded before a summary script:
#
#   awk -f scripts/bench-lines.awk -f scripts/peer-ratios.awk runs
#
# value(unit) is the current line's figure of that unit ("" if none);
# add(key, v) keeps v (unless "") under key; median(key) is the median of
# the values kept under key, -1 when there is none.
function value(unit,    i) {
	for (i = 3; i <= NF; i++) if ($i == unit) return $(i - 1)
	return ""
}
function add(key, v) {
	if (v == "") return
	n[key]++
	vals[key, n[key]] = v + 0
}
function median(key,    i, j, k, t, a) {
	k = n[key]
	if (k == 0) return -1
	for (i = 1; i <= k; i++) a[i] = vals[key, i]
	for (i = 2; i <= k; i++) {
		t = a[i]
		for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
