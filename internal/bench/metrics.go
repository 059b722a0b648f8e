package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The bench reads the vpcgw controller as an operator does: its Prometheus /metrics (the
// network programming latency histogram, syncs, reconciles, record writes, API requests) and the
// /proc entries of the processes the lab started (CPU time, memory). Nothing is read from inside
// the controller.

// Metric names the bench reads from the controller's /metrics.
const (
	latencyMetric    = "vpcgw_network_programming_latency_seconds"
	syncMetric       = "vpcgw_gateway_sync_duration_seconds"
	reconcileMetric  = "controller_runtime_reconcile_time_seconds"
	recordsMetric    = "vpcgw_records_written_total"
	requestsMetric   = "rest_client_requests_total"
	pendingMetric    = "vpcgw_gateway_pending_since_timestamp_seconds"
	identityMetric   = "vpcgw_gateway_identities"
	heapMetric       = "go_memstats_heap_inuse_bytes"
	heapAllocMetric  = "go_memstats_heap_alloc_bytes"
	agentApplyMetric = "vpcgw_agent_apply_duration_seconds"
	phaseMetric      = "vpcgw_sync_phase_duration_seconds"
)

// samples are one scrape: each sample by its name with its labels as printed.
type samples map[string]float64

// splitSeries splits `name{a="x",b="y"}` into its name and labels.
func splitSeries(series string) (string, map[string]string, error) {
	name, rest, ok := strings.Cut(series, "{")
	labels := map[string]string{}
	if !ok {
		return series, labels, nil
	}
	rest, ok = strings.CutSuffix(rest, "}")
	if !ok {
		return "", nil, fmt.Errorf("series %q: no closing brace", series)
	}
	for rest != "" {
		k, after, ok := strings.Cut(rest, `="`)
		if !ok {
			return "", nil, fmt.Errorf("series %q: bad label", series)
		}
		// Label values here hold no escaped quotes (names, codes, methods, numbers).
		v, after, ok := strings.Cut(after, `"`)
		if !ok {
			return "", nil, fmt.Errorf("series %q: unterminated label value", series)
		}
		labels[k] = v
		rest = strings.TrimPrefix(after, ",")
	}
	return name, labels, nil
}

// matches reports whether labels has every label of want.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// sum adds the samples of metric name whose labels include want.
func (s samples) sum(name string, want map[string]string) float64 {
	total := 0.0
	for series, v := range s {
		if !strings.HasPrefix(series, name) {
			continue
		}
		n, labels, err := splitSeries(series)
		if err == nil && n == name && matches(labels, want) {
			total += v
		}
	}
	return total
}

// byLabels adds the samples of metric name by the values of the labels keys, joined by spaces.
func (s samples) byLabels(name string, keys ...string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range s {
		if !strings.HasPrefix(series, name) {
			continue
		}
		n, labels, err := splitSeries(series)
		if err != nil || n != name {
			continue
		}
		vals := make([]string, len(keys))
		for i, k := range keys {
			vals[i] = labels[k]
		}
		out[strings.Join(vals, " ")] += v
	}
	return out
}

// bucket is one cumulative bucket of a histogram.
type bucket struct {
	le    float64 // upper bound, +Inf for the last
	count float64 // observations <= le
}

// histogram is a Prometheus histogram as scraped: cumulative buckets in increasing order.
type histogram struct {
	buckets    []bucket
	count, sum float64
}

// readHistogram reads histogram name from s, adding the series whose labels include want
// (whatever buckets the controller exports).
func readHistogram(s samples, name string, want map[string]string) (histogram, error) {
	byLE := map[float64]float64{}
	for series, v := range s {
		if !strings.HasPrefix(series, name+"_bucket") {
			continue
		}
		n, labels, err := splitSeries(series)
		if err != nil {
			return histogram{}, err
		}
		if n != name+"_bucket" || !matches(labels, want) {
			continue
		}
		le, err := strconv.ParseFloat(labels["le"], 64)
		if err != nil {
			return histogram{}, fmt.Errorf("%s: bucket bound %q: %w", series, labels["le"], err)
		}
		byLE[le] += v
	}
	if len(byLE) == 0 {
		return histogram{}, fmt.Errorf("no histogram %s%v on the controller's /metrics", name, want)
	}
	h := histogram{count: s.sum(name+"_count", want), sum: s.sum(name+"_sum", want)}
	for le, c := range byLE {
		h.buckets = append(h.buckets, bucket{le: le, count: c})
	}
	slices.SortFunc(h.buckets, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	if !math.IsInf(h.buckets[len(h.buckets)-1].le, 1) {
		return histogram{}, fmt.Errorf("histogram %s has no +Inf bucket", name)
	}
	return h, nil
}

// sub is the histogram of the observations made between before and h (the same buckets).
func (h histogram) sub(before histogram) (histogram, error) {
	if len(before.buckets) == 0 {
		return h, nil
	}
	if len(before.buckets) != len(h.buckets) {
		return histogram{}, fmt.Errorf("the histogram's buckets changed between two scrapes (%d, then %d): was the controller restarted?", len(before.buckets), len(h.buckets))
	}
	out := histogram{count: h.count - before.count, sum: h.sum - before.sum}
	for i, b := range h.buckets {
		if before.buckets[i].le != b.le {
			return histogram{}, fmt.Errorf("the histogram's bucket %d changed from le=%g to le=%g", i, before.buckets[i].le, b.le)
		}
		out.buckets = append(out.buckets, bucket{le: b.le, count: b.count - before.buckets[i].count})
	}
	return out, nil
}

// quantile is q (0..1) of the histogram, interpolated linearly within its bucket as Prometheus's
// histogram_quantile does: a quantile in the +Inf bucket is the highest finite bound; NaN when
// the histogram is empty.
func (h histogram) quantile(q float64) float64 {
	if len(h.buckets) < 2 {
		return math.NaN()
	}
	total := h.buckets[len(h.buckets)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	b := 0
	for b < len(h.buckets)-1 && h.buckets[b].count < rank {
		b++
	}
	if b == len(h.buckets)-1 {
		return h.buckets[len(h.buckets)-2].le
	}
	if b == 0 && h.buckets[0].le <= 0 {
		return h.buckets[0].le
	}
	start, end := 0.0, h.buckets[b].le
	countBefore := 0.0
	if b > 0 {
		start, countBefore = h.buckets[b-1].le, h.buckets[b-1].count
	}
	inBucket := h.buckets[b].count - countBefore
	return start + (end-start)*((rank-countBefore)/inBucket)
}

// maxBound is the upper bound of the highest bucket with an observation, and whether it is
// finite (false: some observation is above every finite bound, at least the returned one).
func (h histogram) maxBound() (float64, bool) {
	prev := 0.0
	highest := -1
	for i, b := range h.buckets {
		if b.count > prev {
			highest = i
		}
		prev = b.count
	}
	switch {
	case highest < 0:
		return 0, true
	case math.IsInf(h.buckets[highest].le, 1):
		if highest == 0 {
			return 0, false
		}
		return h.buckets[highest-1].le, false
	}
	return h.buckets[highest].le, true
}

// within keeps only the buckets whose bounds are in bounds (and +Inf): the same observations
// seen through a coarser histogram, such as vpcgw's latency in kube-proxy's buckets. Every bound
// must be one of h's, since a count cannot be split inside a bucket.
func (h histogram) within(bounds []float64) (histogram, error) {
	out := histogram{count: h.count, sum: h.sum}
	want := make(map[float64]bool, len(bounds))
	for _, b := range bounds {
		want[b] = true
	}
	for _, b := range h.buckets {
		if want[b.le] || math.IsInf(b.le, 1) {
			out.buckets = append(out.buckets, b)
			delete(want, b.le)
		}
	}
	if len(want) > 0 {
		return histogram{}, fmt.Errorf("the histogram has no bucket at %d of the %d bounds asked", len(want), len(bounds))
	}
	return out, nil
}

// percentilesOf are the latency percentiles of a histogram of seconds, in milliseconds.
func percentilesOf(h histogram) Percentiles {
	ms := func(s float64) float64 {
		if math.IsNaN(s) {
			return 0
		}
		return s * 1000
	}
	m, finite := h.maxBound()
	return Percentiles{Count: int(math.Round(h.count)), P50: ms(h.quantile(0.50)), P90: ms(h.quantile(0.90)), P99: ms(h.quantile(0.99)),
		Max: ms(m), MaxIsBound: true, MaxAboveBuckets: !finite}
}

// procCPU is a process's CPU time (user + system) in seconds, from /proc/<pid>/stat.
func procCPU(pid int) (float64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: the fields that follow start
	// after its last ')'. utime and stime are fields 14 and 15 of proc(5).
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("process %d: unexpected /proc stat %q", pid, data)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("process %d: short /proc stat %q", pid, data)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("process %d: bad utime/stime in %q", pid, data)
	}
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux architecture Go
// supports (sysconf(_SC_CLK_TCK) is not reachable without cgo).
const clockTicks = 100

// procUsage is a process's CPU time and memory at one moment.
type procUsage struct {
	cpu, rssMiB, hwmMiB float64
}
