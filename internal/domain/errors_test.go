package domain_test

import (
	"testing"

	"github.com/aquiferhq/aquifer/internal/domain"
)

func TestRejectedErrorMessage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  *domain.RejectedError
		want string
	}{
		{&domain.RejectedError{Limit: domain.LimitMemory, Max: 400, Current: 431}, "admission rejected: memory at 431 exceeds limit 400"},
		{&domain.RejectedError{Limit: domain.LimitDBSize, Max: 1000, Current: 1001}, "admission rejected: db_size at 1001 exceeds limit 1000"},
		// A quota is refused when it is reached, not only when it is passed.
		{&domain.RejectedError{Limit: "tenant_quota", Max: 2, Current: 2}, "admission rejected: tenant_quota reached limit 2"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.err, got, c.want)
		}
		if got := domain.PublicMessage(c.err); got != c.want {
			t.Errorf("%+v: public %q, want %q", c.err, got, c.want)
		}
	}
}
