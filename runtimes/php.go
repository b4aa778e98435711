package runtimes

// PHP is the Zend engine, in the CLI, FPM and CGI programs. stallwatch
// knows it by its programs only: its uploads and alerts carry the
// `runtime` tag.
var PHP = &Runtime{ID: "php", Name: "PHP", Executables: []string{"php", "php-fpm", "php-cgi"}, Libraries: []string{"libphp"}}
