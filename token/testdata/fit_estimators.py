"""fit_estimators.py derives the estimator coefficients in ../estimate.go.

For each family it solves a linear programme: choose non-negative
coefficients of

    estimate = ceil(a*cl100k + digit*D + newline*N + wsrun*W + u3*U + c)

(D: ASCII digits, N: newlines, W: spaces/tabs that follow a space or tab,
U: runes of 3-byte UTF-8 outside CJK/Hangul/full-width ranges; see
features() and estimate.go) that minimise the summed relative over-count
estimate/reference over calibration.json, subject to estimate >= reference
for every sample (a >= 1, 0 <= c <= 4). For "claude" the reference is the
larger of @anthropic-ai/tokenizer and ceil(1.30*o200k_base).
Coefficients are rounded up to 0.01.

Run (needs numpy and scipy; Debian: apt-get install python3-scipy):

    /usr/bin/python3 fit_estimators.py [heldout.json heldout_calibration.json]

With a held-out corpus (same format as corpus.json, counted by
`node calibrate.mjs heldout.json heldout_calibration.json`) it also prints
how the coefficients fitted here do on it.
"""
import json, math, os, sys
import numpy as np
from scipy.optimize import linprog

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = ["claude", "gemini", "llama", "qwen", "deepseek", "mistral"]
NAMES = ["a", "digit", "newline", "wsrun", "u3", "c"]
# A rare word repeated 200 times measures one vocabulary entry of Anthropic's
# legacy tokenizer (and Mistral's), not a tokenizer's behaviour on text.
EXCLUDE = {"claude": {"repeated_word"}, "mistral": {"repeated_word"}}


def is_cjk(o):
    return 0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF


def features(text, cl100k):
    d = n = w = u = 0
    prev = ""
    for ch in text:
        o = ord(ch)
        if "0" <= ch <= "9":
            d += 1
        elif ch == "\n":
            n += 1
        elif ch in " \t" and prev in (" ", "\t"):
            w += 1
        if 0x800 <= o < 0x10000 and not is_cjk(o):
            u += 1
        prev = ch
    return [cl100k, d, n, w, u, 1 if text else 0]


def reference(fam, row):
    ref = row[fam]
    if fam == "claude":
        ref = max(ref, math.ceil(1.30 * row["o200k_base"]))
    return ref


def estimate(p, text, cl100k):
    if not text:
        return 0
    f = features(text, cl100k)
    return math.ceil(sum(a * b for a, b in zip(p[:-1], f[:-1])) + p[-1])


def load(corpus, calibration):
    texts = {r["name"]: r["text"] for r in json.load(open(corpus, encoding="utf-8"))}
    return json.load(open(calibration, encoding="utf-8")), texts


def fit(fam, rows, texts):
    X, y = [], []
    for r in rows:
        if r["name"] in EXCLUDE.get(fam, ()) or r[fam] == 0:
            continue
        X.append(features(texts[r["name"]], r["cl100k_base"]))
        y.append(reference(fam, r))
    X, y = np.array(X, float), np.array(y, float)
    bounds = [(1.0, None)] + [(0, None)] * 4 + [(0, 4)]
    res = linprog(c=(X / y[:, None]).sum(0), A_ub=-X, b_ub=-y, bounds=bounds, method="highs")
    assert res.success, res.message
    return [math.ceil(x * 100 - 1e-6) / 100 for x in res.x[:-1]] + [math.ceil(res.x[-1] - 1e-6)]


def report(fam, p, rows, texts):
    ratios = sorted(
        (estimate(p, texts[r["name"]], r["cl100k_base"]) / r[fam], r["name"])
        for r in rows if r[fam] > 0 and r["name"] not in EXCLUDE.get(fam, ()))
    total = sum(estimate(p, texts[r["name"]], r["cl100k_base"]) for r in rows) / sum(r[fam] for r in rows)
    return "ratio %.3f (%s) .. %.2f (%s), total %.3f" % (ratios[0] + ratios[-1] + (total,))


def main():
    rows, texts = load(os.path.join(HERE, "corpus.json"), os.path.join(HERE, "calibration.json"))
    held = load(sys.argv[1], sys.argv[2]) if len(sys.argv) > 2 else None
    for fam in FAMILIES:
        p = fit(fam, rows, texts)
        print(fam, dict(zip(NAMES, p)))
        print("   corpus  ", report(fam, p, rows, texts))
        if held:
            print("   held-out", report(fam, p, *held))


if __name__ == "__main__":
    main()
