package normalize

// Taken reports whether Ordered(u, …) would return u's own result now,
// without normalizing the event again.
func (n *Normalizer) Taken(u Pending) bool { return u.ready && n.inferGen.Load() == u.gen }
