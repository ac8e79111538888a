// Package ratelimit implements a token bucket rate limiter.
package ratelimit

import (
	"errors"
	"sync"
	"time"
)

// ErrLimited is returned when a request must wait longer than allowed.
var ErrLimited = errors.New("rate limited")

// Bucket holds up to Capacity tokens and refills Rate tokens per second.
type Bucket struct {
	mu       sync.Mutex
	Capacity float64
	Rate     float64
	tokens   float64
	last     time.Time
	now      func() time.Time
}

// New returns a full bucket.
func New(capacity, rate float64) *Bucket {
	return &Bucket{Capacity: capacity, Rate: rate, tokens: capacity, last: time.Now(), now: time.Now}
}

func (b *Bucket) refill() {
	now := b.now()
	elapsed := now.Sub(b.last).Seconds()
	b.tokens += elapsed * b.Rate
	if b.tokens > b.Capacity {
		b.tokens = b.Capacity
	}
	b.last = now
}

// Allow takes n tokens if they are available.
func (b *Bucket) Allow(n float64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// Wait blocks until n tokens are available or maxWait has passed.
func (b *Bucket) Wait(n float64, maxWait time.Duration) error {
	deadline := b.now().Add(maxWait)
	for {
		if b.Allow(n) {
			return nil
		}
		if b.now().After(deadline) {
			return ErrLimited
		}
		b.mu.Lock()
		missing := n - b.tokens
		b.mu.Unlock()
		sleep := time.Duration(missing / b.Rate * float64(time.Second))
		if sleep > 50*time.Millisecond {
			sleep = 50 * time.Millisecond
		}
		time.Sleep(sleep)
	}
}

// Limiters keeps one bucket per key.
type Limiters struct {
	mu      sync.Mutex
	buckets map[string]*Bucket
	make    func() *Bucket
}

// Get returns the bucket for key, creating it on first use.
func (l *Limiters) Get(key string) *Bucket {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = make(map[string]*Bucket)
	}
	bucket, ok := l.buckets[key]
	if !ok {
		bucket = l.make()
		l.buckets[key] = bucket
	}
	return bucket
}
