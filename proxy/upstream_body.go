package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/mnemehq/mneme/message"
)

// An upstream request's body is about as long as the client's (the window
// in place of its history): at 58 messages a quarter of the garbage a
// request leaves, at 500 half a megabyte. The OpenAI dialect writes it into
// a buffer taken from a pool, and the buffer goes back once nothing reads
// it: the transport closes every body it is given when it is done with it
// (http.RoundTripper's contract), including those GetBody makes for a
// retry or a redirect, which happen within Client.Do; the exchange holds a
// reference of its own until Do returns. A body the transport never closes
// is only left to the collector.

// pooledBodyMax bounds the buffers the pool keeps.
const pooledBodyMax = 8 << 20

var bodyPool sync.Pool // of *sharedBody

// sharedBody is a pooled buffer and the count of its holders.
type sharedBody struct {
	b    []byte
	refs atomic.Int32
}

// getBody returns an empty pooled buffer held once (by the caller).
func getBody() *sharedBody {
	s, _ := bodyPool.Get().(*sharedBody)
	if s == nil {
		s = &sharedBody{}
	}
	s.b = s.b[:0]
	s.refs.Store(1)
	return s
}

// release drops one hold; the last puts the buffer back.
func (s *sharedBody) release() {
	if s.refs.Add(-1) == 0 && cap(s.b) <= pooledBodyMax {
		bodyPool.Put(s)
	}
}

// reader returns a new reader of the buffer, holding it until closed.
func (s *sharedBody) reader() *bodyReader {
	s.refs.Add(1)
	r := &bodyReader{s: s}
	r.r.Reset(s.b)
	return r
}

var errBodyClosed = errors.New("proxy: upstream body read after close")

// bodyReader reads a sharedBody; Close releases its hold, once. The
// transport may close a request's body while its writing goroutine still
// reads it (a failed write): Close waits for a Read under way, so that the
// buffer is not back in the pool, and written again, while it is copied.
type bodyReader struct {
	mu     sync.Mutex
	r      bytes.Reader
	s      *sharedBody
	closed bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errBodyClosed
	}
	return r.r.Read(p)
}

func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.s.release()
	}
	return nil
}

// pooledBuilder is a dialect that writes the upstream body into a buffer
// it is given (appending to dst, as build returns it).
type pooledBuilder interface {
	buildInto(dst []byte, req *object, win []message.Message, recall bool) ([]byte, error)
}

// sendPooled is send with the body in s: the caller keeps its hold until
// sendPooled returns, and releases it then.
func (p *Proxy) sendPooled(ctx context.Context, in *http.Request, api API, path string, s *sharedBody) (*http.Response, error) {
	out, err := p.newUpstreamRequest(ctx, in, api, path, nil)
	if err != nil {
		return nil, err
	}
	out.Body = s.reader()
	out.ContentLength = int64(len(s.b))
	out.GetBody = func() (io.ReadCloser, error) { return s.reader(), nil }
	return p.client.Do(out)
}
