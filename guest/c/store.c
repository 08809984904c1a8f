#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef GREET
const char *greeting(void); /* from a library shipped beside the program */
#endif
/* Saves a record by writing a temporary file and renaming it over the real one. After a crash,
   the record must be absent or whole. FIXED syncs the temporary file before the rename; GREET
   (the judge's tests) first prints what a library shipped beside the program says. */
int main(void) {
    char buf[64] = {0};
#ifdef GREET
    puts(greeting());
#endif
    int fd = open("/data/record", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n != 8 || memcmp(buf, "complete", 8) != 0) {
            fprintf(stderr, "torn record: %zd bytes\n", n);
            return 1;
        }
        printf("record intact\n");
        return 0;
    }
    fd = open("/data/record.tmp", O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, "complete", 8) != 8) return 2;
#ifdef FIXED
    if (fsync(fd) != 0) return 2;
#endif
    close(fd);
    if (rename("/data/record.tmp", "/data/record") != 0) return 2;
    int dir = open("/data", O_RDONLY | O_DIRECTORY);
    if (dir < 0 || fsync(dir) != 0) return 2;
    close(dir);
    printf("record saved\n");
    return 0;
}
