package controller

import (
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Short names for handler.Funcs' parameter types.
type (
	reqQueue       = workqueue.TypedRateLimitingInterface[reconcile.Request]
	handlerCreate  = event.TypedCreateEvent[client.Object]
	handlerUpdate  = event.TypedUpdateEvent[client.Object]
	handlerDelete  = event.TypedDeleteEvent[client.Object]
	handlerGeneric = event.TypedGenericEvent[client.Object]
)
