package inmem

import (
	"context"
	"fmt"

	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/backend"
)

var _ store.Snapshots = (*Store)(nil)

// PutSnapshot implements store.Snapshots.
func (s *Store) PutSnapshot(ctx context.Context, tenantID, threadID string, seq int64, data []byte) error {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	th := s.lookup(tenantID, threadID)
	if th == nil {
		return store.ErrNotFound
	}
	if seq <= 0 || seq > int64(len(th.events)) {
		return fmt.Errorf("%w: snapshot at seq %d of a thread of %d events", store.ErrInvalid, seq, len(th.events))
	}
	if seq > th.snapSeq {
		th.snapSeq, th.snap = seq, append([]byte(nil), data...)
	}
	return nil
}

// GetSnapshot implements store.Snapshots.
func (s *Store) GetSnapshot(ctx context.Context, tenantID, threadID string) (int64, []byte, error) {
	if err := backend.CheckScope(tenantID, threadID); err != nil {
		return 0, nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, nil, errClosed
	}
	th := s.lookup(tenantID, threadID)
	if th == nil || th.snap == nil {
		return 0, nil, store.ErrNotFound
	}
	return th.snapSeq, append([]byte(nil), th.snap...), nil
}
