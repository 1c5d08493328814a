package sqlite

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/mnemehq/mneme/store/fulltext"
)

// FuzzIndexTokenizer: FTS5, tokenizing a row of the index as the index
// does (indexTokenizer), finds exactly the row's scope tokens and then the
// text's IndexTerms, in order: what a search's MATCH asks for is what the
// index holds, and no term is split, joined or changed on the way.
func FuzzIndexTokenizer(f *testing.F) {
	for _, s := range []string{
		"Please look up invoice INV-4401 for the refund",
		"trace_id=checkout-failure-2026-03-15 in src/app/main.go",
		"我们明天开会 讨论预算 🚀 مرحبا שלום",
		"café naïve Ünïcödé e\u0301 ǅ ß ﬁ İstanbul",
		"हिन्दी में खोज, ภาษาไทย, العَرَبِيَّة, עִבְרִית 🏽",
		"controls:\t\x01\x1b[31m red \x7f\u200b\u200d\ufeff end _under_score_",
		"AND OR NOT NEAR * ^ ( ) \" ' ; -- DROP TABLE events",
		"\xff\xfe invalid \xc3 utf-8",
	} {
		f.Add(s)
	}
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		f.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one in-memory database
	f.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE VIRTUAL TABLE x USING fts5 (body, tokenize = "` + indexTokenizer + `")`,
		`CREATE VIRTUAL TABLE v USING fts5vocab (x, instance)`,
	} {
		if _, err := db.Exec(q); err != nil {
			f.Fatal(err)
		}
	}
	scope := strings.Fields(indexScope("acme", "t"))
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := db.Exec(`DELETE FROM x`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO x (rowid, body) VALUES (1, ?)`, indexScope("acme", "t")+fulltext.IndexBody(s)); err != nil {
			t.Fatal(err)
		}
		rows, err := db.Query(`SELECT term FROM v ORDER BY offset`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var term string
			if err := rows.Scan(&term); err != nil {
				t.Fatal(err)
			}
			got = append(got, term)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(scope), fulltext.IndexTerms(s)...)
		if !slices.Equal(got, want) {
			t.Fatalf("the index tokenizes %q as %q, want %q", s, got, want)
		}
	})
}
