// Command go_regexp reads [[pattern, text], ...] as JSON on stdin and writes, for each pair,
// what Go's regexp package (the one KMM compiles kernel mappings with) makes of it:
// {"error": "..."} when the pattern does not compile, else {"match": true|false} for
// MatchString. tests/test_re2_against_go.py compares gpuctl.common.re2 with it.
package main

import (
	"encoding/json"
	"os"
	"regexp"
)

type verdict struct {
	Error string `json:"error,omitempty"`
	Match bool   `json:"match"`
}

func main() {
	var pairs [][2]string
	if err := json.NewDecoder(os.Stdin).Decode(&pairs); err != nil {
		os.Stderr.WriteString("go_regexp: " + err.Error() + "\n")
		os.Exit(2)
	}
	verdicts := make([]verdict, 0, len(pairs))
	for _, pair := range pairs {
		compiled, err := regexp.Compile(pair[0])
		if err != nil {
			verdicts = append(verdicts, verdict{Error: err.Error()})
			continue
		}
		verdicts = append(verdicts, verdict{Match: compiled.MatchString(pair[1])})
	}
	if err := json.NewEncoder(os.Stdout).Encode(verdicts); err != nil {
		os.Exit(2)
	}
}
