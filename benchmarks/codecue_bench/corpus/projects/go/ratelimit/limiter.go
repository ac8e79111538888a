package ratelimit

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

type clientState struct {
	bucket   *Bucket
	lastSeen time.Time
}

// Limiter keeps one bucket per API key, sized by the key's tier.
type Limiter struct {
	mu      sync.Mutex
	config  *Config
	clients map[string]*clientState
	now     func() time.Time
}

// NewLimiter checks the config and returns a limiter that uses the wall clock.
func NewLimiter(config *Config) (*Limiter, error) {
	if err := config.Validate(); err != nil {
		return nil, err
	}
	return &Limiter{config: config, clients: make(map[string]*clientState), now: time.Now}, nil
}

func (l *Limiter) bucketFor(apiKey string, now time.Time) (*Bucket, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	state, ok := l.clients[apiKey]
	if !ok {
		tier, err := l.config.TierFor(apiKey)
		if err != nil {
			return nil, err
		}
		state = &clientState{bucket: NewBucket(tier.Burst, tier.PerMinute/60, now)}
		l.clients[apiKey] = state
	}
	state.lastSeen = now
	return state.bucket, nil
}

// Allow reports whether a request from apiKey may go ahead now, and if not, when to retry.
func (l *Limiter) Allow(apiKey string) (bool, time.Duration, error) {
	now := l.now()
	bucket, err := l.bucketFor(apiKey, now)
	if err != nil {
		return false, 0, err
	}
	if bucket.Take(1, now) {
		return true, 0, nil
	}
	return false, bucket.RetryAfter(1, now), nil
}

// Sweep forgets clients idle for longer than the configured expiry.
func (l *Limiter) Sweep() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	cutoff := l.now().Add(-l.config.IdleExpiry)
	removed := 0
	for key, state := range l.clients {
		if state.lastSeen.Before(cutoff) {
			delete(l.clients, key)
			removed++
		}
	}
	return removed
}

// Middleware rejects requests over the limit with 429 and a Retry-After header.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, wait, err := l.Allow(r.Header.Get("X-Api-Key"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}
