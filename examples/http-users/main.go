// Command http-users is an HTTP API that creates users, with redlock making
// sure concurrent duplicate requests create a user exactly once: one gets
// 201 Created, the others 409 Conflict.
//
//	go run ./examples/http-users -nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005
//	curl -i -X POST localhost:8080/users -d '{"name":"ada"}'
package main

import (
	"flag"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-go/redlock"
)

func main() {
	nodes := flag.String("nodes", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005", "comma-separated masters")
	addr := flag.String("addr", "localhost:8080", "listen address")
	flag.Parse()

	var clients []redis.UniversalClient
	for _, a := range strings.Split(*nodes, ",") {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: strings.TrimSpace(a)}))
	}
	locks, err := redlock.New(clients, redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("/users", createUser(locks, newUserStore(50*time.Millisecond)))
	log.Printf("listening on %s", *addr)
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
