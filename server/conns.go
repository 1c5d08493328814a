package server

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimiter bounds the connections open at once. At the bound, a new
// connection closes the one idle the longest (a keep-alive connection
// between requests, or one that has sent nothing yet); when none is idle
// the new connection is closed at once. So idle connections cannot starve
// working clients, and the process never runs out of descriptors.
type connLimiter struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]time.Time // open connections; idle since (zero: active)
}

func newConnLimiter(ln net.Listener, max int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, conns: map[net.Conn]time.Time{}}
}

// Accept returns the next connection the bound lets in.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if len(l.conns) >= l.max && !l.closeIdlestLocked() {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns[c] = time.Now()
		l.mu.Unlock()
		return c, nil
	}
}

// closeIdlestLocked closes the connection idle the longest; false when
// every connection is busy. O(open connections), only at the bound.
func (l *connLimiter) closeIdlestLocked() bool {
	var idlest net.Conn
	var since time.Time
	for c, t := range l.conns {
		if !t.IsZero() && (idlest == nil || t.Before(since)) {
			idlest, since = c, t
		}
	}
	if idlest == nil {
		return false
	}
	delete(l.conns, idlest)
	idlest.Close()
	return true
}

// track is the http.Server's ConnState hook.
func (l *connLimiter) track(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.conns[c]; !open {
		return // closed by closeIdlestLocked already
	}
	switch st {
	case http.StateActive:
		l.conns[c] = time.Time{}
	case http.StateIdle:
		l.conns[c] = time.Now()
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
}
