package control

import (
	"testing"

	"github.com/mailctl/mailctl/internal/testwait"
)

// Holds alone of one name (deletes, creates) asked for one after another
// while the name is in use are had in the order they were asked for,
// whichever of them is woken first when the name is let go.
func TestNameLocksServeHoldsAloneInTheOrderTheyCame(t *testing.T) {
	const holds = 8
	keep := nameWait
	defer func() { nameWait = keep }()
	for range 20 {
		var l nameLocks
		request := l.share([]string{"a"})
		queued := make(chan struct{})
		nameWait = func(string) { queued <- struct{}{} }
		had := make(chan int, holds)
		for i := range holds {
			go func() {
				release := l.exclusive("a")
				had <- i
				release()
			}()
			testwait.Recv(t, "the hold alone to wait", queued)
		}
		request()
		for want := range holds {
			if got := testwait.Recv(t, "the next hold alone", had); got != want {
				t.Fatalf("hold alone %d was had when %d's turn came (asked for in the order 0 to %d)", got, want, holds-1)
			}
		}
		testwait.For(t, "the last hold alone to be let go", func() bool { return l.size() == 0 })
	}
}
