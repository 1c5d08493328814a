package api

import (
	"context"

	"github.com/mnemehq/mneme/store/backend"
	"github.com/mnemehq/mneme/window"
)

// The forms a message takes in the window, as the API and the inspector
// name them: window.Covered splits into observed (an observation covers it)
// and catalogued (a catalogue line of the mask or archive strategy does).
const (
	FormRaw        = "raw"
	FormEvicted    = "evicted"
	FormMasked     = "masked"
	FormObserved   = "observed"
	FormCatalogued = "catalogued"
	FormDropped    = "dropped"
)

// formsOf names the form of every message seq the state has seen.
func formsOf(st *window.State) map[int64]string {
	kinds := map[int64]window.Strategy{}
	for _, b := range st.Blocks() {
		for q := b.From; q <= b.To; q++ {
			kinds[q] = b.Kind
		}
	}
	out := map[int64]string{}
	for seq, f := range st.FormsOf() {
		switch f {
		case window.Covered:
			if kinds[seq] == window.Observe {
				out[seq] = FormObserved
			} else {
				out[seq] = FormCatalogued
			}
		default:
			out[seq] = string(f)
		}
	}
	return out
}

// Observations returns the thread's memory block as it stands: the
// observations and catalogues with the log ranges they cover, oldest first.
// An unknown thread has none.
func (a *API) Observations(ctx context.Context, tenant, id string) ([]window.Block, error) {
	if err := backend.CheckScope(tenant, id); err != nil {
		return nil, err
	}
	var out []window.Block
	err := a.m.Thread(tenant, id).Inspect(ctx, func(st *window.State) error {
		out = append([]window.Block{}, st.Blocks()...)
		return nil
	})
	return out, err
}

// Forms returns the form each message of the thread takes in the window
// (FormRaw, FormEvicted, FormMasked, FormObserved, FormCatalogued,
// FormDropped), by seq.
func (a *API) Forms(ctx context.Context, tenant, id string) (map[int64]string, error) {
	if err := backend.CheckScope(tenant, id); err != nil {
		return nil, err
	}
	var out map[int64]string
	err := a.m.Thread(tenant, id).Inspect(ctx, func(st *window.State) error {
		out = formsOf(st)
		return nil
	})
	return out, err
}
