package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/mnemehq/mneme"
	"github.com/mnemehq/mneme/internal/status"
	tenantpkg "github.com/mnemehq/mneme/tenant"
)

// countTokensPath is Anthropic's token-count route.
const countTokensPath = "/v1/messages/count_tokens"

// serveCountTokens answers POST /v1/messages/count_tokens for the window
// Mneme would send for that request, not for the client's whole history:
// the request's conversation is matched against its thread's log as a
// model call would be, the new messages are put after the thread's current
// window, and that body goes upstream to be counted by the model's own
// counter. Nothing is appended to the log. When the new messages take the
// window past its trigger, the model call would compact first; the count
// is then of the window before that compaction (an upper bound).
func (p *Proxy) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	const api = Anthropic
	body, err := readBody(w, r, p.cfg.MaxBodyBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, api, http.StatusRequestEntityTooLarge, "request body over "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
			return
		}
		writeError(w, api, http.StatusBadRequest, "could not read the request body: "+err.Error())
		return
	}
	if err := checkBody(body); err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	req, err := parseChecked(body)
	if err == nil {
		err = checkFields(req)
	}
	if err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	d := anthropicDialect{}
	msgs, err := d.messages(req)
	if err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	mode := r.Header.Get(HeaderMode)
	if mode == "" {
		mode = ModeResend
	}
	if mode != ModeResend && mode != ModeAppend {
		writeError(w, api, http.StatusBadRequest, HeaderMode+": want resend or append, got "+strconv.Quote(mode))
		return
	}
	if err := checkConversation(msgs, mode, api); err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	tenant := tenantpkg.Of(r.Context())
	id := r.Header.Get(HeaderThread)
	if id == "" {
		id = r.Header.Get(HeaderThreadAlt)
	}
	if id == "" {
		id = DeriveThreadID(tenant, msgs)
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.UpstreamTimeout)
	defer cancel()
	win, err := p.m.Thread(tenant, id).PreviewHistory(ctx, msgs, mneme.HistoryOptions{Window: mneme.WindowOptions{Tools: splitArray(req.get("tools"))}, Append: mode == ModeAppend})
	if err != nil {
		p.fail(w, r, api, err)
		return
	}
	out, err := d.build(req, win, false)
	if err != nil {
		writeError(w, api, http.StatusBadRequest, err.Error())
		return
	}
	resp, err := p.send(ctx, r, api, countTokensPath, out)
	if err != nil {
		p.fail(w, r, api, &status.Upstream{Err: err})
		return
	}
	w.Header().Set(HeaderThread, id)
	passThrough(w, resp)
}
