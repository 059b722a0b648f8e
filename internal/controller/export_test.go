// covers: O4 (exports freeEarlierInstallsLease to the tests against the API server)

package controller

// FreeEarlierInstallsLease is freeEarlierInstallsLease, for the tests against the API server.
var FreeEarlierInstallsLease = freeEarlierInstallsLease
