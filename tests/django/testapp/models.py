from django.db import models


class Counter(models.Model):
    name = models.CharField(max_length=50, unique=True)
    n = models.IntegerField(default=0)

    class Meta:
        app_label = "testapp"
