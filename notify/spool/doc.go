// Package spool is the on-disk queue that loses nothing: each item waiting
// for delivery (an upload of a capture) is a small file in a directory,
// written atomically and synced before Add returns, so the queue survives
// a crash or a restart of stallwatch — the queue is the directory, not
// memory.
//
// The order: Run delivers the oldest item that is not waiting out its own
// backoff. A failure the deliverer calls retryable (the agent is down,
// slow or failing) keeps the item and gives it a wait of its own —
// exponential backoff from MinBackoff to MaxBackoff with jitter, so that
// many stallwatch processes do not hit a recovering agent at once — while
// the items queued after it go on, oldest first: one profile the agent
// keeps refusing never holds back the stall that came after it. Once its
// wait is over, it goes before the newer ones again. When different items
// fail one after another, the agent is failing them all, and the whole
// queue waits the same backoff: a down agent gets the tries of one item,
// not of the queue. A failure that never reached the agent (Unreached:
// it could not be dialled) is the agent's alone: the item keeps its place
// and the whole queue waits, so that once the agent is back the items go
// in the order they were queued — a continuous profile's periods among
// them. A failure that may have delivered the item all the
// same (Unconfirmed: the agent took the whole upload and answered after
// the timeout) is not tried again — the agent would have it twice — and
// is counted and logged. Any other failure drops the item, logged and
// counted.
//
// The queue is bounded by age (MaxAge) and bytes (MaxBytes: the sum of
// the items' sizes, the bytes they stand for, not their small files).
// What a bound drops is logged and counted, never silent, oldest first.
// Pending tells the owner of the captures which ones still wait, so that
// pruning (--keep) spares them until a bound lets them go.
//
// One process delivers from a directory at a time (an exclusive flock on
// it); another may still Add, and the one delivering picks its items up
// at its next scan. Delivery is at least once: an item is removed after
// the deliverer reports success, so a crash in between sends it again.
package spool
