// Command probe_version prints the Kafka release franz-go's version probe guesses from a cluster's
// ApiVersions answer (what `kcl misc probe-version` prints): probe_version <bootstrap> <client id>.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

func main() {
	cl, err := kgo.NewClient(kgo.SeedBrokers(os.Args[1]), kgo.ClientID(os.Args[2]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cl.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "kcl"
	req.ClientSoftwareVersion = "probe"
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(kversion.FromApiVersionsResponse(resp).VersionGuess())
}
