package bench

import (
	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ctrlStats are the in-process controller's own metrics (controller-runtime's registry), read
// before and after the churn to split the latency into its parts.
type ctrlStats struct {
	reconcileSec, reconciles float64 // controller_runtime_reconcile_time_seconds of vpcgw-gateway
	syncSec, syncs           float64 // vpcgw_gateway_sync_duration_seconds{result="ok"}: plan -> every ack
	recordWrites             float64 // vpcgw_records_written_total, all operations
	// requests of this process to the API server (client-go's metric), "<method> <code>" -> count;
	// the bench's own EndpointSlice writes are among the PUTs.
	requests map[string]float64
}

func label(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

func gatherStats() ctrlStats {
	s := ctrlStats{requests: map[string]float64{}}
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return s
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "controller_runtime_reconcile_time_seconds":
				if label(m, "controller", "vpcgw-gateway") {
					s.reconcileSec += m.GetHistogram().GetSampleSum()
					s.reconciles += float64(m.GetHistogram().GetSampleCount())
				}
			case "vpcgw_gateway_sync_duration_seconds":
				if label(m, "result", "ok") {
					s.syncSec += m.GetHistogram().GetSampleSum()
					s.syncs += float64(m.GetHistogram().GetSampleCount())
				}
			case "vpcgw_records_written_total":
				s.recordWrites += m.GetCounter().GetValue()
			case "rest_client_requests_total":
				var method, code string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "method":
						method = l.GetValue()
					case "code":
						code = l.GetValue()
					}
				}
				s.requests[method+" "+code] += m.GetCounter().GetValue()
			}
		}
	}
	return s
}

func (s ctrlStats) sub(o ctrlStats) ctrlStats {
	d := ctrlStats{s.reconcileSec - o.reconcileSec, s.reconciles - o.reconciles, s.syncSec - o.syncSec, s.syncs - o.syncs, s.recordWrites - o.recordWrites, map[string]float64{}}
	for k, v := range s.requests {
		if v-o.requests[k] > 0 {
			d.requests[k] = v - o.requests[k]
		}
	}
	return d
}
