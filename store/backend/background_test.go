package backend

import "testing"

// TestBackground: one run at a time, and none after Stop.
func TestBackground(t *testing.T) {
	var b Background
	release, ran := make(chan struct{}), make(chan int, 3)
	before := 0
	if !b.Start(func() { before++ }, func() { <-release; ran <- 1 }) {
		t.Fatal("the first Start did not run")
	}
	if b.Start(func() { before++ }, func() { ran <- 2 }) {
		t.Fatal("a second Start ran beside the first")
	}
	close(release)
	b.Wait()
	if got := <-ran; got != 1 || before != 1 {
		t.Fatalf("ran %d with %d befores, want run 1 and 1 before", got, before)
	}
	if !b.Start(nil, func() { ran <- 3 }) {
		t.Fatal("Start after a finished run did not run")
	}
	b.Stop()
	if got := <-ran; got != 3 {
		t.Fatalf("ran %d, want 3", got)
	}
	if b.Start(nil, func() { ran <- 4 }) {
		t.Fatal("Start ran after Stop")
	}
}
