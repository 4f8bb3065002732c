// Package buildinfo holds what the supervisor and execctl report about
// the build they are.
package buildinfo

// Version is the software version of exec-supervisor and execctl
// (reported by health and --version).
const Version = "0.1.0-dev"
