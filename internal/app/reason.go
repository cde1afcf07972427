package app

import (
	"errors"
	"net/url"
)

// withoutURL returns the cause of a failed outbound request without the URL
// that net/http's *url.Error puts in front of it: `Post "http://h/p?token=x":
// dial tcp 127.0.0.1:1: connect: connection refused` becomes `dial tcp
// 127.0.0.1:1: connect: connection refused`. The cause names the operation
// and the address, which is what a reason needs; the URL may carry secrets
// in its query and is the job's own anyway. Other errors are returned as
// they are.
func withoutURL(err error) error {
	var ue *url.Error
	for errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	return err
}
