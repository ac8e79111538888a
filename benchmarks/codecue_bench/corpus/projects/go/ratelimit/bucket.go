// Package ratelimit limits requests per client with token buckets.
package ratelimit

import (
	"sync"
	"time"
)

// Bucket holds up to Capacity tokens and gains RefillPerSecond tokens every second.
type Bucket struct {
	mu              sync.Mutex
	Capacity        float64
	RefillPerSecond float64
	tokens          float64
	lastRefill      time.Time
}

// NewBucket returns a full bucket.
func NewBucket(capacity, refillPerSecond float64, now time.Time) *Bucket {
	return &Bucket{Capacity: capacity, RefillPerSecond: refillPerSecond, tokens: capacity, lastRefill: now}
}

func (b *Bucket) refill(now time.Time) {
	elapsed := now.Sub(b.lastRefill).Seconds()
	if elapsed <= 0 {
		return
	}
	b.tokens = min(b.Capacity, b.tokens+elapsed*b.RefillPerSecond)
	b.lastRefill = now
}

// Take removes n tokens if the bucket holds them and reports whether it did.
func (b *Bucket) Take(n float64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// RetryAfter is how long until n tokens are available.
func (b *Bucket) RetryAfter(n float64, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	missing := n - b.tokens
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / b.RefillPerSecond * float64(time.Second))
}
