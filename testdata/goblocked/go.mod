module goblocked

go 1.26
