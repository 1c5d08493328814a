package inmem_test

import (
	"context"
	"slices"
	"testing"

	"github.com/mnemehq/mneme/message"
	"github.com/mnemehq/mneme/store"
	"github.com/mnemehq/mneme/store/inmem"
)

func TestTenants(t *testing.T) {
	ctx := context.Background()
	s := inmem.New()
	m := message.NewText(message.User, "x")
	for _, tenant := range []string{"b", "a", "gone"} {
		if _, err := s.Append(ctx, tenant, "t", 0, []store.Event{{Kind: store.KindMessage, Message: &m}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteThread(ctx, "gone", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutMemory(ctx, "c", store.Memory{Namespace: []string{"n"}, Key: "k", Value: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Tenants(ctx)
	if err != nil || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Tenants = %v, %v", got, err)
	}
}
