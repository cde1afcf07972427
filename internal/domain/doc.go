// Package domain holds Aquifer's core types: jobs, their identifiers and
// statuses, the inbound job request and its validation, upstream keys, and the
// typed errors the rest of the program maps onto protocol statuses.
//
// The package is pure: it imports only the standard library and does no I/O.
// Constructors validate (NewJob, JobRequest.Validate); values read back from
// storage are rebuilt field by field by the adapters, which are trusted.
package domain
