package eval

import (
	"fmt"
	"html"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteBenchTable prints the comparison: one row per strategy, the
// default marked, and the settings that make the figures meaningful.
func WriteBenchTable(out io.Writer, r *BenchReport) {
	fmt.Fprintf(out, "profile %s, %d turns, seed %d, %d planted facts (probe: window or top %d archive hits)\n", r.Profile, r.Turns, r.Seed, len(r.Facts), r.TopK)
	fmt.Fprintf(out, "model %s with a %d-token context window (%d usable after the reserved output): chosen so the session overflows it many times\n\n", r.Model, r.BudgetTokens, r.UsableTokens)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STRATEGY\tFACTS\tSENT TOK\tSENT/FULL\tPEAK\tFINAL\tCOMPR\tOVER BUDGET\tPAIR VIOL\tSUPERSEDED\tPREFIX STABLE\tCOMPACT\tµs/WINDOW p50\t")
	for _, rec := range r.Records {
		name := rec.Strategy
		if rec.Default {
			name += " *"
		}
		if rec.Error != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t\t\t\t\t\t\t\n", name, rec.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f%% (%d/%d)\t%d\t%.1f%%\t%d\t%d\t%.1fx\t%d\t%d\t%d\t%.1f%%\t%d\t%.0f\t\n",
			name, 100*rec.FactAvailability, rec.FactsAvailable, rec.Facts, rec.TokensSent, 100*rec.TokensSentRatio,
			rec.PeakWindow, rec.FinalWindow, rec.CompressionRatio, rec.OverBudgetCalls, rec.ToolPairViolations,
			rec.SupersededErrors, 100*rec.PrefixStableRatio, rec.Compactions, rec.WindowUsP50)
	}
	tw.Flush()
	fmt.Fprintln(out, "\n* Mneme's default strategy.")
	for _, rec := range r.Records {
		fmt.Fprintf(out, "  %-18s %s\n", rec.Strategy, rec.Description)
	}
}

// chartColors are the lines' colours, by strategy order.
var chartColors = []string{"#888888", "#e6550d", "#fdae6b", "#9467bd", "#1f77b4", "#2ca02c", "#17becf", "#d62728"}

// WriteChartSVG draws window tokens per call, one line per strategy, with
// the usable budget as a dashed line. The y axis is cut a little above the
// budget: a line that leaves the chart (the full history) is drawn to the
// top edge and its label says where it ends.
func WriteChartSVG(out io.Writer, r *BenchReport) error {
	const w, h, left, right, top, bottom = 960, 540, 70, 250, 40, 50
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	ymax := float64(r.UsableTokens) * 1.25
	calls := 1
	for _, rec := range r.Records {
		calls = max(calls, len(rec.WindowTokens))
	}
	x := func(i int) float64 { return left + pw*float64(i)/float64(max(1, calls-1)) }
	y := func(v int) float64 { return top + ph*(1-min(float64(v), ymax)/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15">Window tokens per call — %s, %d turns, seed %d, %s %d-token window</text>`+"\n", left, html.EscapeString(r.Profile), r.Turns, r.Seed, html.EscapeString(r.Model), r.BudgetTokens)
	for i := 0; i <= 5; i++ {
		v := int(ymax * float64(i) / 5)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%dk</text>`+"\n", left, left+pw, y(v), y(v), left-6, y(v)+4, v/1000)
	}
	for i := 0; i <= 5; i++ {
		c := (calls - 1) * i / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x(c), h-bottom+18, c+1)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">model call</text>`+"\n", left+pw/2, h-10)
	fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black" stroke-dasharray="6 4"/><text x="%.1f" y="%.1f" text-anchor="end">usable budget %d</text>`+"\n", left, left+pw, y(r.UsableTokens), y(r.UsableTokens), left+pw-4, y(r.UsableTokens)-4, r.UsableTokens)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, top, pw, ph)
	for i, rec := range r.Records {
		if len(rec.WindowTokens) == 0 {
			continue
		}
		color := chartColors[i%len(chartColors)]
		var pts strings.Builder
		for j, v := range rec.WindowTokens {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(j), y(v))
		}
		width := 1.5
		if rec.Default {
			width = 3
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" points="%s"/>`+"\n", color, width, strings.TrimSpace(pts.String()))
		label := rec.Strategy
		if rec.Default {
			label += " (default)"
		}
		if rec.PeakWindow > int(ymax) {
			label += fmt.Sprintf(" (off the chart, ends at %dk)", rec.FinalWindow/1000)
		}
		ly := float64(top + 16*i + 10)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/><text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw+6, left+pw+22, ly+30, ly+30, color, left+pw+26, ly+34, html.EscapeString(label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}
