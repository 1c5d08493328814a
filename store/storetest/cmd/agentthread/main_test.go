package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store/storetest"
)

// The lines decode to the transcript's messages, each whole and in order:
// a peer appends the bytes Mneme's benchmark appends.
func TestWriteRoundTrips(t *testing.T) {
	var buf bytes.Buffer
	if err := write(&buf, 300); err != nil {
		t.Fatal(err)
	}
	want := storetest.AgentThread(300)
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	i := 0
	for ; sc.Scan(); i++ {
		if i >= len(want) {
			t.Fatalf("more than %d lines", len(want))
		}
		var m message.Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if !reflect.DeepEqual(m.Parts, want[i].Message.Parts) || m.Role != want[i].Message.Role {
			t.Fatalf("line %d: got %+v, want %+v", i+1, m, *want[i].Message)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(want) {
		t.Fatalf("%d lines, want %d", i, len(want))
	}
}
