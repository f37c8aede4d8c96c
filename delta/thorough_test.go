// The switch for slow exhaustive comparisons.

package delta

import "os"

// thorough reports whether the slow exhaustive comparisons run
// (CDC_SINK_THOROUGH=1); by default big golden files are sampled so the
// race-enabled suite fits CI on 2 cores.
func thorough() bool { return os.Getenv("CDC_SINK_THOROUGH") != "" }
