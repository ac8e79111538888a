package ratelimit

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Tier is a named limit: a burst size and a sustained rate.
type Tier struct {
	Name      string
	Burst     float64
	PerMinute float64
}

// Config maps API keys to tiers; unknown keys get DefaultTier.
type Config struct {
	Tiers       map[string]Tier
	KeyTiers    map[string]string
	DefaultTier string
	IdleExpiry  time.Duration
}

// ErrUnknownTier is returned when a key names a tier that is not configured.
var ErrUnknownTier = errors.New("unknown tier")

// TierFor returns the tier of an API key.
func (c *Config) TierFor(apiKey string) (Tier, error) {
	name, ok := c.KeyTiers[apiKey]
	if !ok {
		name = c.DefaultTier
	}
	tier, ok := c.Tiers[strings.ToLower(name)]
	if !ok {
		return Tier{}, fmt.Errorf("%w: %q", ErrUnknownTier, name)
	}
	return tier, nil
}

// Validate checks that every tier has a positive rate and that the default exists.
func (c *Config) Validate() error {
	for name, tier := range c.Tiers {
		if tier.Burst <= 0 || tier.PerMinute <= 0 {
			return fmt.Errorf("tier %s: burst and rate must be positive", name)
		}
	}
	if _, ok := c.Tiers[c.DefaultTier]; !ok {
		return fmt.Errorf("%w: default %q", ErrUnknownTier, c.DefaultTier)
	}
	return nil
}
