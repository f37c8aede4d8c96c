package normalize

import (
	"math"
	"time"
)

// Delta / Spark readable range of Date and Timestamp values:
// 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z.
const (
	minDateDays   = -719162 // 0001-01-01
	maxDateDays   = 2932896 // 9999-12-31
	minTsMicros   = int64(minDateDays) * microsPerDay
	maxTsMicros   = int64(maxDateDays+1)*microsPerDay - 1
	microsPerDay  = int64(86_400_000_000)
	microsPerSec  = int64(1_000_000)
	maxTimeMicros = microsPerDay // 24:00:00 is a valid PostgreSQL time
)

// Debezium's renderings of PostgreSQL ±infinity for integer timestamps
// (org.postgresql.PGStatement.DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY,
// and Long.MAX/MIN for NanoTimestamp).
const (
	pgPosInfinity = int64(9223372036825200000)
	pgNegInfinity = int64(-9223372036832400000)
)

func isInfinitySentinel(v int64) (pos, ok bool) {
	switch v {
	case pgPosInfinity, math.MaxInt64:
		return true, true
	case pgNegInfinity, math.MinInt64:
		return false, true
	}
	return false, false
}

// daysFromCivil returns days since 1970-01-01 of the proleptic Gregorian date.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func daysInMonth(y, m int64) int64 {
	switch m {
	case 4, 6, 9, 11:
		return 30
	case 2:
		if (y%4 == 0 && y%100 != 0) || y%400 == 0 {
			return 29
		}
		return 28
	}
	return 31
}

// digits parses exactly n decimal digits at s[i:].
func digits(s string, i, n int) (int64, bool) {
	if i+n > len(s) {
		return 0, false
	}
	var v int64
	for j := i; j < i+n; j++ {
		c := s[j]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// parseDate parses [+-]YYYY[Y..]-MM-DD at s[0:], returns days and the index after it.
func parseDate(s string) (days int64, next int, ok bool) {
	i, neg := 0, false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var y int64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 7 {
		y = y*10 + int64(s[i]-'0')
		i++
	}
	if i-start < 4 {
		return 0, 0, false
	}
	if neg {
		y = -y
	}
	if i >= len(s) || s[i] != '-' {
		return 0, 0, false
	}
	m, ok1 := digits(s, i+1, 2)
	if !ok1 || i+3 >= len(s) || s[i+3] != '-' {
		return 0, 0, false
	}
	d, ok2 := digits(s, i+4, 2)
	if !ok2 || m < 1 || m > 12 || d < 1 || d > daysInMonth(y, m) {
		return 0, 0, false
	}
	return daysFromCivil(y, m, d), i + 6, true
}

// parseClock parses HH:MM[:SS[.fffffffff]] at s[i:]; returns micros of day,
// the index after it, and the fraction text span.
func parseClock(s string, i int) (micros int64, next, fracStart, fracEnd int, ok bool) {
	h, ok1 := digits(s, i, 2)
	if !ok1 || i+2 >= len(s) || s[i+2] != ':' {
		return 0, 0, 0, 0, false
	}
	mi, ok2 := digits(s, i+3, 2)
	if !ok2 {
		return 0, 0, 0, 0, false
	}
	i += 5
	var sec int64
	if i < len(s) && s[i] == ':' {
		var ok3 bool
		if sec, ok3 = digits(s, i+1, 2); !ok3 {
			return 0, 0, 0, 0, false
		}
		i += 3
	}
	fracStart, fracEnd = i, i
	var frac int64
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if n < 6 {
				frac = frac*10 + int64(s[i]-'0')
			}
			n++
			i++
		}
		if n == 0 || n > 9 {
			return 0, 0, 0, 0, false
		}
		for ; n < 6; n++ {
			frac *= 10
		}
		fracEnd = i
	}
	if h > 24 || mi > 59 || sec > 60 || (h == 24 && (mi != 0 || sec != 0 || frac != 0)) {
		return 0, 0, 0, 0, false
	}
	if sec == 60 { // leap second: PostgreSQL never produces it; fold into the next second
		sec = 59
		frac = 999999
	}
	return ((h*60+mi)*60+sec)*microsPerSec + frac, i, fracStart, fracEnd, true
}

// parseZone parses "", Z, z or ±HH[[:]MM[[:]SS]] at s[i:] (the whole rest);
// returns the offset east of UTC in seconds.
func parseZone(s string, i int) (offSec int64, ok bool) {
	if i == len(s) {
		return 0, true
	}
	if (s[i] == 'Z' || s[i] == 'z') && i+1 == len(s) {
		return 0, true
	}
	if s[i] != '+' && s[i] != '-' {
		return 0, false
	}
	sign := int64(1)
	if s[i] == '-' {
		sign = -1
	}
	i++
	h, ok1 := digits(s, i, 2)
	if !ok1 || h > 18 {
		return 0, false
	}
	i += 2
	var m, sec int64
	for part := 0; part < 2 && i < len(s); part++ {
		if s[i] == ':' {
			i++
		}
		v, ok2 := digits(s, i, 2)
		if !ok2 || v > 59 {
			return 0, false
		}
		if part == 0 {
			m = v
		} else {
			sec = v
		}
		i += 2
	}
	if i != len(s) {
		return 0, false
	}
	return sign * (h*3600 + m*60 + sec), true
}

// parseTimestamp parses an ISO-8601 timestamp (Debezium ZonedTimestamp /
// IsoTimestamp: 2018-06-20T13:13:16.945104Z, any offset, 'T' or ' ') into UTC
// micros. Digits beyond microseconds are truncated.
func parseTimestamp(s string) (int64, bool) {
	days, i, ok := parseDate(s)
	if !ok || i >= len(s) || (s[i] != 'T' && s[i] != 't' && s[i] != ' ') {
		return 0, false
	}
	if days < minDateDays-2 || days > maxDateDays+2 { // keeps the arithmetic far from overflow
		return 0, false
	}
	clock, j, _, _, ok := parseClock(s, i+1)
	if !ok {
		return 0, false
	}
	off, ok := parseZone(s, j)
	if !ok {
		return 0, false
	}
	return days*microsPerDay + clock - off*microsPerSec, true
}

// formatUTCTime renders micros-of-day as HH:MM:SS[.frac]Z, reusing frac text.
func formatUTCTime(micros int64, frac string) string {
	sec := micros / microsPerSec
	h, m, s := sec/3600, sec/60%60, sec%60
	b := make([]byte, 0, 10+len(frac))
	b = append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+m/10), byte('0'+m%10), ':', byte('0'+s/10), byte('0'+s%10))
	if frac != "" {
		b = append(b, '.')
		b = append(b, frac...)
	}
	b = append(b, 'Z')
	return string(b)
}

func timeToMicros(t time.Time) int64 {
	return t.Unix()*microsPerSec + int64(t.Nanosecond()/1000)
}

// floorDiv is division rounding toward negative infinity.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
