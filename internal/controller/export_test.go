package controller

// FreeEarlierInstallsLease is freeEarlierInstallsLease, for the tests against the API server.
var FreeEarlierInstallsLease = freeEarlierInstallsLease
