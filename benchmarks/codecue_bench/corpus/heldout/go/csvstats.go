// Package csvstats computes per-column summary statistics for numeric CSV data.
package csvstats

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ColumnStats summarises one numeric column. Empty cells are counted as missing.
type ColumnStats struct {
	Name    string
	Count   int
	Missing int
	Min     float64
	Max     float64
	Mean    float64
	StdDev  float64
	Median  float64
	values  []float64
}

// ParseError reports a cell that is neither empty nor a number.
type ParseError struct {
	Line   int
	Column string
	Value  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("line %d, column %q: %q is not a number", e.Line, e.Column, e.Value)
}

var ErrNoHeader = errors.New("csvstats: input has no header row")

// Options controls how input is read.
type Options struct {
	Comma        rune
	SkipInvalid  bool     // count unparsable cells as missing instead of failing
	OnlyColumns  []string // nil means all columns
	TrimSpace    bool
	MissingMarks []string // extra spellings of "no value", e.g. "NA", "-"
}

// Compute reads CSV from r and returns statistics for each selected column in header order.
func Compute(r io.Reader, opts Options) ([]*ColumnStats, error) {
	reader := csv.NewReader(r)
	if opts.Comma != 0 {
		reader.Comma = opts.Comma
	}
	reader.FieldsPerRecord = -1 // ragged rows are tolerated; short rows count as missing

	header, err := reader.Read()
	if err == io.EOF {
		return nil, ErrNoHeader
	} else if err != nil {
		return nil, fmt.Errorf("csvstats: reading header: %w", err)
	}

	wanted := make(map[string]bool, len(opts.OnlyColumns))
	for _, name := range opts.OnlyColumns {
		wanted[name] = true
	}
	missing := map[string]bool{"": true}
	for _, mark := range opts.MissingMarks {
		missing[mark] = true
	}

	columns := make([]*ColumnStats, len(header))
	for i, name := range header {
		if len(wanted) == 0 || wanted[name] {
			columns[i] = &ColumnStats{Name: name, Min: math.Inf(1), Max: math.Inf(-1)}
		}
	}

	for line := 2; ; line++ {
		record, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("csvstats: line %d: %w", line, err)
		}
		for i, col := range columns {
			if col == nil {
				continue
			}
			cell := ""
			if i < len(record) {
				cell = record[i]
			}
			if opts.TrimSpace {
				cell = strings.TrimSpace(cell)
			}
			if missing[cell] {
				col.Missing++
				continue
			}
			value, err := strconv.ParseFloat(cell, 64)
			if err != nil {
				if opts.SkipInvalid {
					col.Missing++
					continue
				}
				return nil, &ParseError{Line: line, Column: col.Name, Value: cell}
			}
			col.values = append(col.values, value)
		}
	}

	result := make([]*ColumnStats, 0, len(columns))
	for _, col := range columns {
		if col != nil {
			col.finish()
			result = append(result, col)
		}
	}
	return result, nil
}

func (c *ColumnStats) finish() {
	c.Count = len(c.values)
	if c.Count == 0 {
		c.Min, c.Max = math.NaN(), math.NaN()
		return
	}
	sum := 0.0
	for _, v := range c.values {
		sum += v
		c.Min = math.Min(c.Min, v)
		c.Max = math.Max(c.Max, v)
	}
	c.Mean = sum / float64(c.Count)
	squares := 0.0
	for _, v := range c.values {
		squares += (v - c.Mean) * (v - c.Mean)
	}
	if c.Count > 1 {
		c.StdDev = math.Sqrt(squares / float64(c.Count-1))
	}
	sort.Float64s(c.values)
	mid := c.Count / 2
	if c.Count%2 == 1 {
		c.Median = c.values[mid]
	} else {
		c.Median = (c.values[mid-1] + c.values[mid]) / 2
	}
}
