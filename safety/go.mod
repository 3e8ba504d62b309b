module github.com/relock-go/relock/safety

go 1.26.0

replace github.com/relock-go/relock => ..

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/redis/rueidis v1.0.79
)

require golang.org/x/sys v0.47.0 // indirect
