package status

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Publisher writes the ConfigMap: a controller-runtime Runnable that runs on the leader only.
// It writes at start, then when the Recorder changed (at most once per MinInterval) and at least
// once per Heartbeat; when it stops cleanly it writes once more with the stopped time.
type Publisher struct {
	// Client writes the ConfigMap; Reader reads it past any cache (the controller's cache holds
	// no ConfigMap of its own).
	Client client.Client
	Reader client.Reader
	// Namespace and Name of the ConfigMap (Name default ConfigMapName).
	Namespace, Name string
	// Holder names this controller (its pod), Version its build.
	Holder, Version string
	Gates           Gates
	Flags           Flags
	Recorder        *Recorder
	// MinInterval and Heartbeat: see DefaultMinInterval and DefaultHeartbeat (0: those).
	MinInterval, Heartbeat time.Duration
	Log                    logr.Logger

	cm *corev1.ConfigMap // as last written (nil: read it first)
}

// NeedLeaderElection is true: only the leader writes.
func (p *Publisher) NeedLeaderElection() bool { return true }

// setDefaults fills what the caller left zero.
func (p *Publisher) setDefaults() {
	if p.Name == "" {
		p.Name = ConfigMapName
	}
	if p.MinInterval <= 0 {
		p.MinInterval = DefaultMinInterval
	}
	if p.Heartbeat <= 0 {
		p.Heartbeat = DefaultHeartbeat
	}
	p.Heartbeat = max(p.Heartbeat, p.MinInterval)
}

// Start writes until ctx ends.
func (p *Publisher) Start(ctx context.Context) error {
	p.setDefaults()
	var last time.Time // of the last successful write
	var written uint64
	pending := true // the first write is due at once
	for {
		if pending && !time.Now().Before(last.Add(p.MinInterval)) || time.Since(last) >= p.Heartbeat {
			gws, seq := p.Recorder.Gateways()
			if err := p.write(ctx, gws, time.Time{}); err != nil {
				if ctx.Err() != nil {
					break
				}
				p.Log.Error(err, "publishing the controller's status", "configMap", p.Namespace+"/"+p.Name)
				// Try again after MinInterval, as if a change were pending.
				last, pending = time.Now(), true
			} else {
				last, written, pending = time.Now(), seq, false
			}
		}
		pending = pending || p.Recorder.Seq() != written
		due := last.Add(p.Heartbeat)
		changed := p.Recorder.Changed()
		if pending {
			due = last.Add(p.MinInterval)
			changed = nil // already known: only the interval is waited for
		}
		t := time.NewTimer(time.Until(due))
		select {
		case <-ctx.Done():
		case <-changed:
			pending = p.Recorder.Seq() != written
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	// A clean stop says so, so that readers need not wait for the heartbeat to age.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gws, _ := p.Recorder.Gateways()
	if err := p.write(sctx, gws, time.Now()); err != nil {
		p.Log.Info("could not publish that the controller stopped", "error", err.Error())
	}
	return nil
}

// write makes the ConfigMap hold the current status.
func (p *Publisher) write(ctx context.Context, gws map[string]Gateway, stopped time.Time) error {
	pub := Published{Version: p.Version, Holder: p.Holder, Heartbeat: time.Now(), Stopped: stopped, Gates: p.Gates, Flags: p.Flags, Gateways: gws,
		Conditions: p.Recorder.Conditions()}
	if len(gws) > MaxGateways {
		pub.Gateways = map[string]Gateway{}
		for _, name := range slices.Sorted(maps.Keys(gws))[:MaxGateways] {
			pub.Gateways[name] = gws[name]
		}
		pub.GatewaysOmitted = len(gws) - MaxGateways
	}
	data, err := Encode(pub)
	if err != nil {
		return err
	}
	if p.cm == nil {
		var cur corev1.ConfigMap
		switch err := p.Reader.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: p.Name}, &cur); {
		case apierrors.IsNotFound(err):
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Labels: labels()}, Data: data}
			if err := p.Client.Create(ctx, cm); err != nil {
				return fmt.Errorf("creating ConfigMap %s/%s: %w", p.Namespace, p.Name, err)
			}
			p.cm = cm
			return nil
		case err != nil:
			return fmt.Errorf("reading ConfigMap %s/%s: %w", p.Namespace, p.Name, err)
		}
		p.cm = &cur
	}
	cm := p.cm.DeepCopy()
	cm.Data = data
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	maps.Copy(cm.Labels, labels())
	if err := p.Client.Update(ctx, cm); err != nil {
		p.cm = nil // read it again next time (a conflict, or it was deleted)
		return fmt.Errorf("updating ConfigMap %s/%s: %w", p.Namespace, p.Name, err)
	}
	p.cm = cm
	return nil
}

func labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "vpcgw", "app.kubernetes.io/component": "controller"}
}
