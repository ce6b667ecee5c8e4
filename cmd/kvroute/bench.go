package main

import "errors"

func runBench(args []string) error {
	return errors.New("usage: kvroute bench index [flags] (see kvroute bench index -h)")
}
