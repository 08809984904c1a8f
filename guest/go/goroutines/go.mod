module deja.example/goroutines

go 1.19
