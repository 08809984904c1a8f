module deja.example/recover

go 1.19
