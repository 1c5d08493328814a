package eval

import (
	"os"
	"slices"
	"testing"
	"time"
)

func TestParseLoCoMo(t *testing.T) {
	c, err := LoadLoCoMoFile("testdata/locomo_small.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "locomo_small" || c.SpeakerA != "Caroline" || c.SpeakerB != "Melanie" {
		t.Fatalf("header %q %q %q", c.ID, c.SpeakerA, c.SpeakerB)
	}
	// Sessions come back in number order, whatever the file's key order;
	// a date without a session (session_3) is no session.
	if len(c.Sessions) != 2 || c.Sessions[0].N != 1 || c.Sessions[1].N != 2 {
		t.Fatalf("sessions %+v", c.Sessions)
	}
	if want := time.Date(2023, 7, 20, 20, 56, 0, 0, time.UTC); !c.Sessions[1].Date.Equal(want) {
		t.Fatalf("session 2 date %v, want %v", c.Sessions[1].Date, want)
	}
	turns := c.Turns()
	var ids []string
	for _, tu := range turns {
		ids = append(ids, tu.DiaID)
	}
	if !slices.Equal(ids, []string{"D1:1", "D1:2", "D2:1", "D2:2"}) {
		t.Fatalf("turn order %v", ids)
	}
	if turns[3].BlipCaption != "a painting of a sunrise over a lake" || turns[3].Speaker != "Melanie" {
		t.Fatalf("turn D2:2 %+v", turns[3])
	}
	cases := []struct {
		q        int
		category int
		answer   string
		evidence []string
		dropped  []string
	}{
		{0, LoCoMoTemporal, "The Saturday before 20 July 2023", []string{"D2:1"}, nil},
		// Two ids in one entry, the "D:1:1" variant, duplicates once; a
		// bare "D" and a turn that does not exist are dropped, not kept.
		{1, LoCoMoMultiHop, "2022", []string{"D2:2", "D1:2", "D1:1"}, []string{"D", "D9:9"}},
		{2, LoCoMoAdversarial, "", nil, nil},
	}
	if len(c.Questions) != len(cases) {
		t.Fatalf("%d questions", len(c.Questions))
	}
	for _, tc := range cases {
		q := c.Questions[tc.q]
		if q.Category != tc.category || q.Answer != tc.answer || !slices.Equal(q.Evidence, tc.evidence) || !slices.Equal(q.DroppedEvidence, tc.dropped) {
			t.Errorf("question %d: %+v", tc.q, q)
		}
	}
}

func TestParseLoCoMoErrors(t *testing.T) {
	cases := map[string]string{
		"not json":     `{`,
		"no speakers":  `{"session_1":[]}`,
		"no sessions":  `{"speaker_a":"A","speaker_b":"B"}`,
		"bad date":     `{"speaker_a":"A","speaker_b":"B","session_1":[],"session_1_date_time":"yesterday"}`,
		"turn no id":   `{"speaker_a":"A","speaker_b":"B","session_1":[{"speaker":"A","text":"x"}]}`,
		"qa not list":  `{"speaker_a":"A","speaker_b":"B","session_1":[],"qa":{}}`,
		"session type": `{"speaker_a":"A","speaker_b":"B","session_1":"x"}`,
	}
	for name, in := range cases {
		if _, err := ParseLoCoMo("x", []byte(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestLoadLoCoMoShared reads the five conversations of the shared data.
func TestLoadLoCoMoShared(t *testing.T) {
	convs, err := LoadLoCoMo("../../shared/data/locomo")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"26": 419, "30": 369, "41": 663, "42": 629, "43": 680}
	wantQ := map[string]int{"26": 152, "30": 81, "41": 152, "42": 199, "43": 178}
	if len(convs) != len(want) {
		t.Fatalf("%d conversations", len(convs))
	}
	for _, c := range convs {
		if n := len(c.Turns()); n != want[c.ID] {
			t.Errorf("conversation %s: %d turns, want %d", c.ID, n, want[c.ID])
		}
		for _, s := range c.Sessions {
			if s.Date.IsZero() {
				t.Errorf("conversation %s session %d: no date", c.ID, s.N)
			}
		}
		answerable := 0
		for _, q := range c.Questions {
			if q.Category != LoCoMoAdversarial {
				answerable++
			}
		}
		if answerable != wantQ[c.ID] {
			t.Errorf("conversation %s: %d questions of categories 1–4, want %d", c.ID, answerable, wantQ[c.ID])
		}
	}
}

func FuzzParseLoCoMo(f *testing.F) {
	if b, err := os.ReadFile("testdata/locomo_small.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"conversation":{"speaker_a":"A","speaker_b":"B","session_1":[]},"qa":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseLoCoMo("f", data)
		if err != nil {
			return
		}
		if c.SpeakerA == "" || len(c.Sessions) == 0 {
			t.Fatalf("accepted without speakers or sessions: %+v", c)
		}
	})
}
