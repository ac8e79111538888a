// Package semver parses and compares semantic version strings such as "1.4.0-rc.2+build.7".
package semver

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a parsed semantic version. Build metadata is kept but ignored when comparing.
type Version struct {
	Major, Minor, Patch int
	Prerelease          []string
	Build               string
}

// Parse accepts an optional leading "v".
func Parse(s string) (Version, error) {
	var v Version
	rest := strings.TrimPrefix(s, "v")
	if i := strings.IndexByte(rest, '+'); i >= 0 {
		v.Build = rest[i+1:]
		rest = rest[:i]
		if v.Build == "" {
			return Version{}, fmt.Errorf("semver %q: empty build metadata", s)
		}
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		v.Prerelease = strings.Split(rest[i+1:], ".")
		rest = rest[:i]
		for _, id := range v.Prerelease {
			if id == "" {
				return Version{}, fmt.Errorf("semver %q: empty pre-release identifier", s)
			}
		}
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("semver %q: want MAJOR.MINOR.PATCH", s)
	}
	numbers := [3]*int{&v.Major, &v.Minor, &v.Patch}
	for i, part := range parts {
		if len(part) > 1 && part[0] == '0' {
			return Version{}, fmt.Errorf("semver %q: leading zero in %q", s, part)
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("semver %q: %q is not a non-negative integer", s, part)
		}
		*numbers[i] = n
	}
	return v, nil
}

// MustParse is for constants in tests and tables; it panics on bad input.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v Version) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d.%d.%d", v.Major, v.Minor, v.Patch)
	if len(v.Prerelease) > 0 {
		b.WriteString("-" + strings.Join(v.Prerelease, "."))
	}
	if v.Build != "" {
		b.WriteString("+" + v.Build)
	}
	return b.String()
}

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Compare returns -1, 0 or 1. A pre-release sorts before the release it precedes.
func Compare(a, b Version) int {
	if c := compareInt(a.Major, b.Major); c != 0 {
		return c
	}
	if c := compareInt(a.Minor, b.Minor); c != 0 {
		return c
	}
	if c := compareInt(a.Patch, b.Patch); c != 0 {
		return c
	}
	switch {
	case len(a.Prerelease) == 0 && len(b.Prerelease) == 0:
		return 0
	case len(a.Prerelease) == 0:
		return 1
	case len(b.Prerelease) == 0:
		return -1
	}
	for i := 0; i < len(a.Prerelease) && i < len(b.Prerelease); i++ {
		x, y := a.Prerelease[i], b.Prerelease[i]
		xn, xErr := strconv.Atoi(x)
		yn, yErr := strconv.Atoi(y)
		switch {
		case xErr == nil && yErr == nil:
			if c := compareInt(xn, yn); c != 0 {
				return c
			}
		case xErr == nil:
			return -1 // numeric identifiers have lower precedence than alphanumeric ones
		case yErr == nil:
			return 1
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		}
	}
	return compareInt(len(a.Prerelease), len(b.Prerelease))
}

// Satisfies reports whether v matches a caret constraint like "^1.2.0" (same major, at least 1.2.0).
func Satisfies(v Version, constraint string) (bool, error) {
	if !strings.HasPrefix(constraint, "^") {
		return false, fmt.Errorf("constraint %q: only ^X.Y.Z is supported", constraint)
	}
	floor, err := Parse(constraint[1:])
	if err != nil {
		return false, err
	}
	return v.Major == floor.Major && Compare(v, floor) >= 0, nil
}
