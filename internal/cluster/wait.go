package cluster

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// waitHTTP waits until url answers 200, failing early when the process ends.
func waitHTTP(ctx context.Context, what string, p *process, url string, timeout time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited:\n%s", what, p.output())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_ = resp.Body.Close() // only the status was wanted
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready at %s (%s): %w", what, url, last, err)
	}
	return nil
}
