package netlab

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ScrapeMetrics reads a Prometheus text endpoint (a lab process's /metrics) into its samples,
// each by its name with its labels as printed (`vpcgw_gateway_agents_connected{gateway="lab-gw"}`).
func ScrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	return ScrapeMetricsWith(ctx, &http.Client{Timeout: 5 * time.Second}, url)
}

// ScrapeMetricsInNetns is ScrapeMetrics of an endpoint inside network namespace netns (a
// process's loopback there): every connection is dialled from inside it.
func ScrapeMetricsInNetns(ctx context.Context, netns, url string) (map[string]float64, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return DialInNetns(ctx, netns, network, addr)
		},
		DisableKeepAlives: true,
	}
	return ScrapeMetricsWith(ctx, &http.Client{Timeout: 5 * time.Second, Transport: tr}, url)
}

// ScrapeMetricsWith is ScrapeMetrics through client.
func ScrapeMetricsWith(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }() // a response read: nothing to lose on close
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %s", url, resp.Status)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		samples[line[:i]] = v
	}
	return samples, sc.Err()
}
