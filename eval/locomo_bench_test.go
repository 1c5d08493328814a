package eval

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// locomoData is the LoCoMo release's folder, relative to this package.
const locomoData = "../../shared/data/locomo"

// TestLoCoMoBenchRows runs the bench on one real conversation at one budget
// and checks the report's shape: every method, the five categories, the
// default flag on Mneme's default strategy only, search figures for the
// methods that search and null for last-n, and the JSON field names the
// issue fixes.
func TestLoCoMoBenchRows(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(locomoData, "26.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "26.json"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := LoCoMoBench(context.Background(), LoCoMoConfig{Dir: dir, Budgets: []int{8192}})
	if err != nil {
		t.Fatal(err)
	}
	cats := []string{"all", "multi-hop", "temporal", "open-domain", "single-hop"}
	byMethod := map[string][]LoCoMoRow{}
	for _, r := range rep.Rows {
		byMethod[r.Method] = append(byMethod[r.Method], r)
		if r.BudgetTokens != 8192 {
			t.Errorf("%s: budget %d", r.Method, r.BudgetTokens)
		}
		if r.EvidenceAvailable < 0 || r.EvidenceAvailable > 1 {
			t.Errorf("%s %s: evidence_available %v", r.Method, r.Category, r.EvidenceAvailable)
		}
		if r.Default != (r.Method == "mneme-mask") {
			t.Errorf("%s: default %v", r.Method, r.Default)
		}
		if searches := r.Method != LoCoMoLastN; searches != (r.SearchHitAt10 != nil) || searches != (r.SearchRecallAt10 != nil) || searches != (r.SearchMRRAt10 != nil) {
			t.Errorf("%s: search figures %v %v %v", r.Method, r.SearchRecallAt10, r.SearchHitAt10, r.SearchMRRAt10)
		}
	}
	for _, m := range []string{"mneme-mask", LoCoMoLastN, LoCoMoFTS5} {
		var got []string
		all := 0
		sum := 0
		for _, r := range byMethod[m] {
			got = append(got, r.Category)
			if r.Category == "all" {
				all = r.Questions
			} else {
				sum += r.Questions
			}
		}
		if !slices.Equal(got, cats) {
			t.Errorf("%s: categories %v, want %v", m, got, cats)
		}
		if all == 0 || all != sum {
			t.Errorf("%s: %d questions in all, %d over the categories", m, all, sum)
		}
	}
	// A plain last-n window of 8k holds some of a conversation's evidence,
	// never all of it: a bench that found none (or all) measures nothing.
	if ln := byMethod[LoCoMoLastN][0]; ln.EvidenceAvailable <= 0 || ln.EvidenceAvailable >= 1 {
		t.Errorf("last-n evidence_available %v", ln.EvidenceAvailable)
	}

	// Refs are drawn from a seed of the conversation: a second run gives
	// the same rows (random refs moved them by up to 0.02).
	again, err := LoCoMoBench(context.Background(), LoCoMoConfig{Dir: dir, Budgets: []int{8192}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep.Rows, again.Rows) {
		t.Errorf("two runs differ:\n%+v\n%+v", rep.Rows, again.Rows)
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Rows []map[string]json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	want := []string{"budget_tokens", "category", "default", "evidence_available", "method", "questions", "search_hit_at_10", "search_mrr_at_10", "search_recall_at_10"}
	for _, r := range raw.Rows {
		var keys []string
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			t.Fatalf("row keys %v, want %v", keys, want)
		}
	}
}
