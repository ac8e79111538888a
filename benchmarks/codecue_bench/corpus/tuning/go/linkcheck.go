// Command linkcheck reads URLs (one per line) and checks them concurrently with a bounded worker pool.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

type result struct {
	URL      string
	Status   int
	Err      error
	Duration time.Duration
}

func (r result) OK() bool {
	return r.Err == nil && r.Status >= 200 && r.Status < 400
}

type checker struct {
	client    *http.Client
	userAgent string
}

func (c *checker) check(ctx context.Context, url string) result {
	start := time.Now()
	// HEAD is cheaper, but some servers reject it; fall back to GET on 405.
	status, err := c.do(ctx, http.MethodHead, url)
	if err == nil && status == http.StatusMethodNotAllowed {
		status, err = c.do(ctx, http.MethodGet, url)
	}
	return result{URL: url, Status: status, Err: err, Duration: time.Since(start)}
}

func (c *checker) do(ctx context.Context, method, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, fmt.Errorf("bad url: %w", err)
	}
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

func readURLs(path string) ([]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var urls []string
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		urls = append(urls, line)
	}
	return urls, scanner.Err()
}

func checkAll(ctx context.Context, c *checker, urls []string, workers int) []result {
	jobs := make(chan string)
	results := make(chan result)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for url := range jobs {
				results <- c.check(ctx, url)
			}
		}()
	}
	go func() {
		defer close(jobs)
		for _, url := range urls {
			select {
			case jobs <- url:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()

	var all []result
	for r := range results {
		all = append(all, r)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].URL < all[j].URL })
	return all
}

func main() {
	workers := flag.Int("workers", 8, "concurrent requests")
	timeout := flag.Duration("timeout", 10*time.Second, "per-request timeout")
	total := flag.Duration("deadline", 2*time.Minute, "give up on the whole run after this long")
	flag.Parse()
	if flag.NArg() != 1 || *workers < 1 {
		fmt.Fprintln(os.Stderr, "usage: linkcheck [-workers N] [-timeout D] urls.txt")
		os.Exit(2)
	}

	urls, err := readURLs(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "linkcheck: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *total)
	defer cancel()

	c := &checker{client: &http.Client{Timeout: *timeout}, userAgent: "linkcheck/1.0"}
	broken := 0
	for _, r := range checkAll(ctx, c, urls, *workers) {
		switch {
		case r.OK():
			fmt.Printf("ok   %3d %6dms %s\n", r.Status, r.Duration.Milliseconds(), r.URL)
		case errors.Is(r.Err, context.DeadlineExceeded):
			broken++
			fmt.Printf("TIME     %6dms %s\n", r.Duration.Milliseconds(), r.URL)
		default:
			broken++
			fmt.Printf("FAIL %3d %6dms %s %v\n", r.Status, r.Duration.Milliseconds(), r.URL, r.Err)
		}
	}
	if broken > 0 {
		fmt.Fprintf(os.Stderr, "%d of %d links broken\n", broken, len(urls))
		os.Exit(1)
	}
}
