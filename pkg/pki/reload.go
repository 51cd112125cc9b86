package pki

import (
	"crypto/tls"
	"os"
	"sync"
	"time"
)

// Reloader serves a certificate from files and picks up replaced files
// (rotation) for new handshakes, checking the files' modification times at
// most once per interval. A failed reload keeps serving the previous
// certificate and reports the error through Err. Established connections
// keep the certificate they were opened with.
type Reloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	lastCheck time.Time
	lastErr   error
}

// NewReloader loads the pair once (failing if it cannot) and returns a
// reloader. interval <= 0 means 10s; now may be nil.
func NewReloader(certFile, keyFile string, interval time.Duration, now func() time.Time) (*Reloader, error) {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, interval: interval, now: now}
	cm, km, err := r.mtimes()
	if err != nil {
		return nil, err
	}
	c, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	r.cert, r.certMod, r.keyMod, r.lastCheck = &c, cm, km, now()
	return r, nil
}

func (r *Reloader) mtimes() (time.Time, time.Time, error) {
	cs, err := os.Stat(r.certFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	ks, err := os.Stat(r.keyFile)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	return cs.ModTime(), ks.ModTime(), nil
}

// Current returns the certificate served now, reloading first if due.
func (r *Reloader) Current() *tls.Certificate {
	r.mu.Lock()
	due := r.now().Sub(r.lastCheck) >= r.interval
	if due {
		r.lastCheck = r.now() // one checker per interval
	}
	cur, cm0, km0 := r.cert, r.certMod, r.keyMod
	r.mu.Unlock()
	if !due {
		return cur
	}
	// File I/O outside the lock.
	cm, km, err := r.mtimes()
	if err == nil && (!cm.Equal(cm0) || !km.Equal(km0)) {
		var c tls.Certificate
		if c, err = LoadKeyPair(r.certFile, r.keyFile); err == nil {
			r.mu.Lock()
			r.cert, r.certMod, r.keyMod = &c, cm, km
			cur = r.cert
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
	return cur
}

// Err is the error of the last reload attempt (nil if it worked or nothing changed).
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// GetCertificate is a tls.Config.GetCertificate callback.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Current(), nil
}

// GetClientCertificate is a tls.Config.GetClientCertificate callback.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.Current(), nil
}
