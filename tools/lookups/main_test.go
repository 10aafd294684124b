package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(ds, 50, 90, 99, 100)
	assert.Equal(t, []time.Duration{50 * time.Millisecond, 90 * time.Millisecond, 99 * time.Millisecond, 100 * time.Millisecond}, got)
	assert.Equal(t, []time.Duration{7 * time.Millisecond}, percentiles([]time.Duration{7 * time.Millisecond}, 99))
}
