// Command kvstore serves a small in-memory key-value store over HTTP with TTLs.
//
//	PUT    /kv/{key}?ttl=30s   body is the value
//	GET    /kv/{key}
//	DELETE /kv/{key}
//	GET    /stats
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"
)

const maxValueBytes = 1 << 20

var errNotFound = errors.New("key not found")

type entry struct {
	value     []byte
	expiresAt time.Time // zero means no expiry
}

// Store is safe for concurrent use.
type Store struct {
	mu      sync.RWMutex
	entries map[string]entry
	now     func() time.Time
}

func NewStore() *Store {
	return &Store{entries: make(map[string]entry), now: time.Now}
}

func (s *Store) Get(key string) ([]byte, error) {
	s.mu.RLock()
	e, ok := s.entries[key]
	s.mu.RUnlock()
	if !ok || (!e.expiresAt.IsZero() && s.now().After(e.expiresAt)) {
		return nil, errNotFound
	}
	return e.value, nil
}

func (s *Store) Put(key string, value []byte, ttl time.Duration) {
	e := entry{value: value}
	if ttl > 0 {
		e.expiresAt = s.now().Add(ttl)
	}
	s.mu.Lock()
	s.entries[key] = e
	s.mu.Unlock()
}

func (s *Store) Delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.entries[key]
	delete(s.entries, key)
	return ok
}

// Sweep drops expired entries; Get already hides them, this just frees the memory.
func (s *Store) Sweep() int {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	removed := 0
	for key, e := range s.entries {
		if !e.expiresAt.IsZero() && now.After(e.expiresAt) {
			delete(s.entries, key)
			removed++
		}
	}
	return removed
}

type server struct {
	store *Store
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write response: %v", err)
	}
}

func (srv *server) handleKey(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/kv/")
	if key == "" || strings.Contains(key, "/") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid key"})
		return
	}
	switch r.Method {
	case http.MethodGet:
		value, err := srv.store.Get(key)
		if err != nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(value)
	case http.MethodPut:
		var ttl time.Duration
		if raw := r.URL.Query().Get("ttl"); raw != "" {
			parsed, err := time.ParseDuration(raw)
			if err != nil || parsed < 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "ttl must be a duration like 30s"})
				return
			}
			ttl = parsed
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValueBytes))
		if err != nil {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "value too large"})
			return
		}
		srv.store.Put(key, body, ttl)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		if !srv.store.Delete(key) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": errNotFound.Error()})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method not allowed"})
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "listen address")
	sweepEvery := flag.Duration("sweep", time.Minute, "how often to drop expired keys")
	flag.Parse()

	srv := &server{store: NewStore()}
	go func() {
		for range time.Tick(*sweepEvery) {
			if n := srv.store.Sweep(); n > 0 {
				log.Printf("swept %d expired keys", n)
			}
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("/kv/", srv.handleKey)
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
