module deja.example/unixsock

go 1.19
