package main

import (
	"testing"
	"time"
)

func TestParseRetain(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"30d", 30 * 24 * time.Hour, false},
		{"1.5d", 36 * time.Hour, false},
		{"720h", 720 * time.Hour, false},
		{"90m", 90 * time.Minute, false},
		{"-1d", 0, true},
		{"0d", 0, true},
		{"thirty days", 0, true},
		{"-5h", 0, true},
		{"d", 0, true},
	} {
		got, err := parseRetain(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseRetain(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
