package postgres

import "github.com/mnemehq/mneme/store"

// Migration returns the SQL of schema version v, for the upgrade tests.
func Migration(v int) string { return migrations[v] }

// GroupRequest is one Append of a group that AppendGroup commits.
type GroupRequest struct {
	Tenant, Thread string
	After          int64
	Events         []store.Event
}

// AppendGroup commits reqs as one group (as concurrent Appends that
// queued together would be) and returns each one's outcome: the group
// statement's semantics, tested without relying on timing to form the
// group.
func (s *Store) AppendGroup(reqs []GroupRequest) []error {
	batch := make([]*appendReq, len(reqs))
	now := s.clock()
	for i, q := range reqs {
		rows := make([]row, len(q.Events))
		for j, ev := range q.Events {
			r, err := encode(ev, q.After+int64(j)+1, now)
			if err != nil {
				panic(err)
			}
			rows[j] = r
		}
		batch[i] = newAppendReq(q.Tenant, q.Thread, q.After, rows, now)
	}
	s.commitGroup(batch)
	errs := make([]error, len(batch))
	for i, r := range batch {
		errs[i] = r.Err
	}
	return errs
}

// SetGINCleanAt sets the bytes added to the events' GIN pending list that
// start a cleaning (0: never).
func (s *Store) SetGINCleanAt(n int64) { s.cleaner.at = n }

// GINCleanAt returns them.
func (s *Store) GINCleanAt() int64 { return s.cleaner.at }

// WaitGINClean waits for a cleaning under way.
func (s *Store) WaitGINClean() { s.cleaner.wait() }
