package lab

import "github.com/vpcgw/vpcgw/internal/netlab"

// ProbeWith runs a probe with all of netlab's options (a long /stream transfer, a fixed source).
func (l *Lab) ProbeWith(ns string, o netlab.ProbeOptions) (netlab.ProbeResult, error) {
	return l.net.Probe(ns, []string{l.opts.Bins.Lab, "probe"}, o)
}
