package domain

// ParseUpstreamForTest is UpstreamOf without its cache.
var ParseUpstreamForTest = parseUpstream
