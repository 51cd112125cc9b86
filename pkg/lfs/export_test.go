package lfs

// Abandon drops the FS without writing anything: a simulated crash.
func (fs *FS) Abandon() { fs.abandon() }
