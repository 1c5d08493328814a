package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/mnemehq/mneme"
)

// parseRetain reads --retain: a Go duration ("720h") or a number of days
// ("30d"); "" or "0" means keep forever.
func parseRetain(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n <= 0 || n > 365*100 {
			return 0, fmt.Errorf("--retain %q: want a positive number of days like 30d, or a duration like 720h", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--retain %q: want a positive number of days like 30d, or a duration like 720h", s)
	}
	return d, nil
}

// startRetention runs the retention sweeper of `mneme serve` (at start,
// then every hour or every maxAge when shorter) and returns the function
// that stops it and waits for it: call it before closing the Engine.
func startRetention(ctx context.Context, m *mneme.Engine, maxAge time.Duration, logger *slog.Logger) (stop func()) {
	if maxAge <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.RunRetention(ctx, maxAge, 0); err != nil {
			logger.Error("retention sweeper stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
